"""Managers archive first: every removed or cut byte is recoverable through its reference."""

import errno
import json
import os
import re
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxmgmt import Context, load_definition
from ctxmgmt.messages import SUMMARY_PREFIX, check_messages
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import conversations

CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
}
NOTICE = re.compile(
    r"\n?\[truncated: original [^\]]*chars (\d+)-(\d+) are stored as (t-[0-9a-f]{32})[^\]]*\]\n"
)

truncate = st.builds(
    lambda n, mode: {
        "type": "ToolsOutputTruncateManager",
        "config": {"max_output_length": n, "mode": mode, "offload": True},
    },
    st.integers(256, 1500),
    st.sampled_from(["head", "tail", "head_tail"]),
)
compact = st.builds(
    lambda n, recent, old, preview: {
        "type": "ToolResultCompactionManager",
        "config": {"recent_n": n, "recent_max_chars": recent, "old_max_chars": old, "preview": preview},
    },
    st.integers(0, 3),
    st.integers(600, 3000),
    st.integers(256, 600),
    st.sampled_from(["head", "tail", "head_tail"]),
)
autocompact = st.builds(
    lambda t, old: {
        "type": "AutoCompactManager",
        "config": {"compact_ratio_threshold": t, "compaction": {"recent_n": 1, "old_max_chars": old}},
    },
    st.floats(0.05, 1.0),
    st.integers(256, 800),
)
summarize = st.builds(
    lambda r, keep: {
        "type": "SummarizationManager",
        "config": {"summary_ratio": r, "preserve_recent_messages": keep},
    },
    st.floats(0.1, 0.8),
    st.integers(0, 8),
)


def restore(content, store, session):
    """The original text of a cut tool result: kept parts plus the recalled range."""
    match = NOTICE.search(content)
    if match is None:
        return content
    start, end, ref = int(match.group(1)), int(match.group(2)), match.group(3)
    head, tail = content[: match.start()], content[match.end() :]
    if content.startswith("[truncated"):  # tail mode: the notice comes first
        head = ""
    recalled = store.read(session, ref, offset=start, limit=end - start).text
    return head + recalled + tail


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conversations(max_turns=20),
    st.lists(st.one_of(truncate, compact, summarize, autocompact), min_size=1, max_size=3),
)
def test_every_removed_byte_is_recoverable(messages, entries):
    """Output valid; cut results restore exactly; removed messages are in their archive; reruns are stable."""
    store = LocalOffloader(tempfile.mkdtemp())
    definition = load_definition({"name": "p", "hooks": {"pre_llm": entries}})
    ctx = Context(system_prompt="sys", messages=messages)
    result = definition.apply("pre_llm", ctx, offloader=store, session="s")
    assert not [e["error"] for e in result.trace if e["error"]]
    out = result.context.messages
    assert not check_messages(out, partial_tail=True)
    originals = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    archived = []
    for entry in store.list("s"):
        if entry["kind"] == "messages":
            archived += json.loads(store.read("s", entry["ref"]).text)
    archived_ids = {m.get("tool_call_id") for m in archived}
    for m in out:
        if m["role"] == "tool" and isinstance(m["content"], str):
            original = originals[m["tool_call_id"]]
            assert restore(m["content"], store, "s") == original or m["tool_call_id"] in archived_ids
    kept_ids = {m.get("tool_call_id") for m in out if m["role"] == "tool"}
    assert set(originals) <= kept_ids | archived_ids  # every result is kept or archived
    # Every original message is still there, or restorable from its notice, or archived whole.
    key = lambda m: json.dumps(m, sort_keys=True)  # noqa: E731
    present = {key(m) for m in out} | {key(m) for m in archived}
    # A result may have been cut (with its notice) and then archived by a summary:
    # restoring the archived copy through its notice gives the original.
    restored = {
        m["tool_call_id"]: restore(m["content"], store, "s")
        for m in [*out, *archived]
        if m["role"] == "tool" and isinstance(m["content"], str) and NOTICE.search(m["content"])
    }
    for m in messages:
        assert key(m) in present or restored.get(m.get("tool_call_id")) == m.get("content"), m
    if not any(e["type"] in ("SummarizationManager", "AutoCompactManager") for e in entries):
        again = definition.apply("pre_llm", result.context, offloader=store, session="s")
        assert again.context.messages == out


def test_a_failing_store_removes_nothing(tmp_path, monkeypatch):
    """When the archive write fails, no message is cut or removed, and the trace says so."""
    store = LocalOffloader(tmp_path)
    monkeypatch.setattr(
        os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device"))
    )
    big = {"role": "tool", "tool_call_id": "a", "content": "x" * 5000}
    call = CALL
    msgs = [{"role": "user", "content": "task"}, call, big] + [
        {"role": "assistant", "content": f"s{i}."} for i in range(20)
    ]
    definition = load_definition(
        {
            "name": "f",
            "hooks": {
                "pre_llm": [
                    {
                        "type": "ToolsOutputTruncateManager",
                        "config": {"max_output_length": 300, "offload": True},
                    },
                    {"type": "ToolResultCompactionManager", "config": {"recent_n": 0, "old_max_chars": 300}},
                    {"type": "SummarizationManager", "config": {"preserve_recent_messages": 2}},
                ]
            },
        }
    )
    result = definition.apply("pre_llm", Context(messages=msgs), offloader=store, session="s")
    assert result.context.messages == tuple(msgs)
    assert all("No space left on device" in e["error"] for e in result.trace)


def test_offload_without_a_store_is_a_clear_error():
    """offload: true with no store configured fails open with a reason."""
    d = load_definition(
        {
            "name": "f",
            "hooks": {
                "post_tool": [
                    {
                        "type": "ToolsOutputTruncateManager",
                        "config": {"max_output_length": 300, "offload": True},
                    }
                ]
            },
        }
    )
    call = CALL
    ctx = Context(
        messages=[
            {"role": "user", "content": "q"},
            call,
            {"role": "tool", "tool_call_id": "a", "content": "y" * 999},
        ]
    )
    result = d.apply("post_tool", ctx)
    assert result.context.messages == ctx.messages and "offload store" in result.trace[0]["error"]


def test_summary_guides_to_the_archive(tmp_path):
    """The summary names where its removed messages are archived, and they read back exactly."""
    store = LocalOffloader(tmp_path)
    filler = "I looked at the logs and the configuration again and nothing stands out yet. " * 4
    msgs = [{"role": "user", "content": "task"}] + [
        {"role": "assistant", "content": f"step {i} done. {filler}"} for i in range(30)
    ]
    d = load_definition({"name": "s", "hooks": {"pre_llm": [{"type": "SummarizationManager"}]}})
    out = d.apply("pre_llm", Context(messages=msgs), offloader=store, session="s").context
    summary = next(m["content"] for m in out.messages if m["content"].startswith(SUMMARY_PREFIX))
    ref = re.search(r"(m-[0-9a-f]{32}): (\d+) messages", summary)
    assert ref and "## Archived messages" in summary
    archived = json.loads(store.read("s", ref.group(1)).text)
    assert len(archived) == int(ref.group(2)) and archived[0] == msgs[1]


@pytest.mark.parametrize("mode", ["head", "tail", "head_tail"])
def test_retruncating_changes_nothing(tmp_path, mode):
    """Content already cut with offload is not cut again, even by a smaller limit."""
    store = LocalOffloader(tmp_path)
    call = CALL
    ctx = Context(
        messages=[
            {"role": "user", "content": "q"},
            call,
            {"role": "tool", "tool_call_id": "a", "content": "line\n" * 2000},
        ]
    )
    big = load_definition(
        {
            "name": "a",
            "hooks": {
                "post_tool": [
                    {
                        "type": "ToolsOutputTruncateManager",
                        "config": {"max_output_length": 1000, "offload": True, "mode": mode},
                    }
                ]
            },
        }
    )
    first = big.apply("post_tool", ctx, offloader=store, session="s").context
    small = load_definition(
        {
            "name": "b",
            "hooks": {
                "post_tool": [
                    {
                        "type": "ToolsOutputTruncateManager",
                        "config": {"max_output_length": 400, "offload": True, "mode": mode},
                    }
                ]
            },
        }
    )
    assert small.apply("post_tool", first, offloader=store, session="s").context.messages == first.messages
    single = Context(
        messages=[
            {"role": "user", "content": "q"},
            call,
            {"role": "tool", "tool_call_id": "a", "content": "z" * 5000},
        ]
    )
    cut = big.apply("post_tool", single, offloader=store, session="s").context.messages[-1]["content"]
    assert "context_read(" in cut and len(cut) <= 1000  # a single-line output still gets the notice


def test_a_summary_that_would_not_save_tokens_archives_nothing(tmp_path):
    """When the summary would be larger than what it replaces, nothing is removed and nothing
    is archived, so later runs do not pile up copies (and the model gets no recall tools)."""
    store = LocalOffloader(tmp_path)
    d = load_definition({"name": "s", "hooks": {"pre_llm": [{"type": "SummarizationManager"}]}})
    msgs = [{"role": "user", "content": "task"}] + [{"role": "assistant", "content": "ok"} for _ in range(20)]
    for _ in range(3):
        result = d.apply("pre_llm", Context(messages=msgs), offloader=store, session="s")
        assert result.context.messages == tuple(msgs)
        assert "would not save tokens" in result.trace[0]["details"]["note"]
    assert store.list("s") == [] and "offloaded" not in result.trace[0]["details"]


def test_a_recalled_result_is_compacted_without_a_second_archive(tmp_path):
    """Compaction cuts a context_read result over its cap like any other, without archiving
    it again; a second run changes nothing. A result that only begins as one does, naming an
    archive the conversation's store does not hold (content can copy the header), is
    archived before it is cut."""
    from tests.test_marks import turn

    store = LocalOffloader(tmp_path)
    ref = store.store_tool_result("s", "row " * 22_500)
    entry = {"type": "ToolResultCompactionManager", "config": {"recent_n": 0, "old_max_chars": 2_000}}
    d = load_definition({"name": "c", "hooks": {"pre_llm": [entry]}})
    for named, archived in ((ref, False), (f"t-{'0' * 32}", True)):
        recalled = f"[{named}: chars from 0 of 90000; next offset 20000]\n" + "row " * 5_000
        msgs = turn(recalled, call_id="r", name="context_read")
        out = d.apply("pre_llm", Context(messages=msgs), offloader=store, session="s")
        text = out.context.messages[2]["content"]
        assert f"[truncated: original {len(recalled):,} chars" in text and "#k=" in text
        assert bool(out.trace[0]["details"].get("offloaded")) is archived
        assert ("stored as t-" in text) is archived and len(store.list("s")) == 1 + archived
        again = d.apply("pre_llm", out.context, offloader=store, session="s")
        assert list(again.context.messages) == list(out.context.messages)
