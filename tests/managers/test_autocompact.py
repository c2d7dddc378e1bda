import tempfile

from ctxmgmt import Context, load_definition
from ctxmgmt.messages import SUMMARY_PREFIX
from ctxmgmt.offload import LocalOffloader
from ctxmgmt.testing import make_conversation


def auto(threshold, **compaction):
    return load_definition(
        {
            "name": "a",
            "hooks": {
                "pre_llm": [
                    {
                        "type": "AutoCompactManager",
                        "config": {
                            "compact_ratio_threshold": threshold,
                            "compaction": {"recent_n": 1, "old_max_chars": 300, **compaction},
                            "summarization": {"preserve_recent_messages": 6},
                        },
                    }
                ]
            },
        }
    )


def test_compaction_alone_when_it_is_enough():
    """When compaction brings tokens below the threshold, no summary is made."""
    ctx = Context(messages=make_conversation(200, seed=2, tool_output_words=300))
    result = auto(0.75).apply("pre_llm", ctx, offloader=LocalOffloader(tempfile.mkdtemp()), session="s")
    details = result.trace[0]["details"]
    assert details["compact_ratio"] <= 0.75 and details["compacted"] > 0
    assert not any(str(m.get("content") or "").startswith(SUMMARY_PREFIX) for m in result.context.messages)


def test_compression_follows_and_keeps_the_compaction():
    """Above the threshold the compacted context is summarised, and compacted results stay compacted."""
    ctx = Context(messages=make_conversation(200, seed=2, tool_output_words=300))
    result = auto(0.05).apply("pre_llm", ctx, offloader=LocalOffloader(tempfile.mkdtemp()), session="s")
    out = result.context.messages
    assert any(str(m.get("content") or "").startswith(SUMMARY_PREFIX) for m in out)
    kept_tools = [m for m in out if m["role"] == "tool"]
    assert any("stored as t-" in m["content"] for m in kept_tools[:-1])
    assert result.trace[0]["tokens_after"] < result.trace[0]["tokens_before"]


def test_without_a_store_it_fails_open():
    """Compaction needs an offload store; without one nothing changes and the trace says why."""
    ctx = Context(messages=make_conversation(50, seed=2, tool_output_words=300))
    result = auto(0.75).apply("pre_llm", ctx)
    assert result.context.messages == ctx.messages and "offload store" in result.trace[0]["error"]


def test_compaction_enough_then_a_second_run_changes_nothing():
    """When compaction was enough, a second run with no new message does not summarise,
    even though the compaction has nothing left to do; a new message lets it summarise."""
    ctx = Context(messages=make_conversation(200, seed=2, tool_output_words=300))
    store = LocalOffloader(tempfile.mkdtemp())
    d = auto(0.75)
    first = d.apply("pre_llm", ctx, offloader=store, session="s")
    again = d.apply("pre_llm", first.context, offloader=store, session="s")
    assert again.context.messages == first.context.messages
    assert "no message has arrived" in again.trace[0]["details"]["note"]
    grown = first.context.with_messages([*first.context.messages, {"role": "user", "content": "go on"}])
    assert d.apply("pre_llm", grown, offloader=store, session="s").trace[0]["details"].get("summarized")


def test_fewer_results_than_recent_n_are_all_recent():
    """With fewer tool results than recent_n, every result gets the generous cap."""
    msgs = make_conversation(6, seed=3, tool_output_words=400)
    results = [m for m in msgs if m["role"] == "tool"]
    assert 0 < len(results) < 8 and all(300 < len(m["content"]) < 20_000 for m in results)
    d = auto(0.75, recent_n=8)
    result = d.apply(
        "pre_llm", Context(messages=msgs), offloader=LocalOffloader(tempfile.mkdtemp()), session="s"
    )
    assert result.trace[0]["details"]["compacted"] == 0


def test_without_a_store_and_without_store_cut_it_compacts_and_summarises():
    """With without_store: cut and no store, old results become previews whose notice gives
    the original size and no reference, a summary follows, nothing errs, and a second run
    changes nothing."""
    ctx = Context(messages=make_conversation(200, seed=2, tool_output_words=300))
    d = auto(0.05, without_store="cut")
    result = d.apply("pre_llm", ctx)
    assert result.trace[0]["error"] is None and result.trace[0]["details"]["compacted"] > 0
    out = result.context.messages
    assert any(str(m.get("content") or "").startswith(SUMMARY_PREFIX) for m in out)
    cut = [m for m in out if m["role"] == "tool" and "[truncated: original" in m["content"]]
    assert cut and not any("stored as" in m["content"] for m in cut)
    again = d.apply("pre_llm", result.context)
    assert list(again.context.messages) == list(out)


def test_a_preview_cut_without_a_store_keeps_the_original_size_when_cut_again():
    """Without a store, a result cut under the generous cap and cut again when it is old keeps
    the original's size in its notice."""
    big = "x" * 5000
    msgs = [{"role": "user", "content": "task"}]
    for i in range(3):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "run", "arguments": "{}"}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": big},
        ]
    entry = {
        "type": "ToolResultCompactionManager",
        "config": {"recent_n": 3, "recent_max_chars": 2000, "old_max_chars": 400, "without_store": "cut"},
    }
    first = load_definition({"name": "c", "hooks": {"pre_llm": [entry]}}).apply(
        "pre_llm", Context(messages=msgs)
    )
    entry["config"]["recent_n"] = 0
    second = load_definition({"name": "c", "hooks": {"pre_llm": [entry]}}).apply("pre_llm", first.context)
    for m in second.context.messages[2::2]:
        assert len(m["content"]) <= 400 and "original 5,000 chars" in m["content"]
