"""What an execution did, as its record: the result handed back, the stored record (per
LLM call the tokens before and after the managers, per hook run what it removed and added),
the prompt cache over the calls, the thresholds for the timeline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..cache import output_tokens
from ..calibration import MAX_RATIO, MIN_RATIO, reported_input_tokens
from ..context import Context
from ..definitions import Definition
from ..fit import reserve_tokens
from ..llm import ModelConfig, ModelsConfig
from ..messages import is_summary, pinned_positions, text_of
from ..store.repository import now_ms
from .conversation import USAGE_FIELDS, usage_record

__all__ = ["ExecutionResult", "Ran", "cache_summary", "call_entry", "execution_record"]


@dataclass(frozen=True, slots=True)
class Ran:
    """What an execution's conversation went through, for its record."""

    definition: Definition | None
    view: Context
    """The managed view it ended with."""
    record: list[dict[str, Any]]
    """What happened, from the question on."""
    trace: list[dict[str, Any]]
    """The hook runs (:attr:`~ctxmgmt.agents.conversation.Conversation.runs`)."""
    outputs: list[str]
    """The references of the tool outputs archived whole when they were cut."""


@dataclass(slots=True)
class ExecutionResult:
    """What one execution did."""

    memory_id: str
    response: str
    finished: bool
    """False when max_iteration was reached without a final answer."""
    definition: str | None
    definition_source: str
    """request, agent, inline or none."""
    usage: list[dict[str, Any]] = field(default_factory=list)
    trace: list[dict[str, Any]] = field(default_factory=list)
    """One entry per hook invocation: hook, iteration, and the managers' trace entries."""
    execution_id: str = ""
    """The id of this execution's record (``GET /_plugins/_ml/executions/{execution_id}``)."""
    cache: dict[str, Any] = field(default_factory=dict)
    """The prompt cache over the execution's LLM calls: input tokens, the reusable prefix and
    its share, the provider's cached figures, and ``estimated_cost`` when pricing is set."""

    def to_opensearch(self) -> dict[str, Any]:
        """The answer in OpenSearch's shape."""
        return {
            "inference_results": [
                {
                    "output": [
                        {"name": "memory_id", "result": self.memory_id},
                        {"name": "execution_id", "result": self.execution_id},
                        {"name": "response", "result": self.response},
                        {"name": "finished", "result": self.finished},
                        {"name": "usage", "result": self.usage},
                        {
                            "name": "context_management",
                            "result": {
                                "definition": self.definition,
                                "source": self.definition_source,
                                "cache": self.cache,
                                "trace": self.trace,
                            },
                        },
                    ]
                }
            ]
        }


MAX_ERROR_CHARS = 2000


def execution_record(
    agent_id: str,
    result: ExecutionResult,
    run: Ran,
    version: int | None,
    started: int,
    before: Mapping[int, int],
    requests: Mapping[int, tuple[int, float, int]],
    failure: BaseException | None,
    offload: bool,
) -> dict[str, Any]:
    """What an execution did, as its record: per LLM call the tokens before and after the
    managers and the usage; per hook run its trace entries and the call it belongs to; what
    was archived; the window and the activation thresholds, for the timeline."""
    window = run.view.context_window
    answered = {u["iteration"]: u for u in result.usage}
    calls: list[dict[str, Any]] = []
    priced = {c["call"]: c for c in result.cache.get("calls", ())}
    for call, (counted, ratio, reusable) in sorted(requests.items()):  # the one that failed included
        usage = answered.get(call)
        # The call's usage record, or, for the call that failed, the same fields without a report.
        sent = usage if usage is not None else usage_record(counted, ratio, reusable)
        entry = call_entry(call, before.get(call, counted), ratio, sent, usage)
        if call in priced:
            entry["estimated_cost"] = priced[call]["estimated_cost"]
        if usage is None:
            entry["failed"] = True
        calls.append(entry)
    archived: list[str] = list(run.outputs)
    for run_entry in run.trace:
        for entry in run_entry["entries"]:
            refs = entry["details"].get("offloaded")
            archived += [refs] if isinstance(refs, str) else [r for r in refs or () if isinstance(r, str)]
    status = "error" if failure is not None else ("finished" if result.finished else "max_iteration")
    error = None if failure is None else f"{type(failure).__name__}: {failure}"[:MAX_ERROR_CHARS]
    return {
        "execution_id": result.execution_id,
        "agent_id": agent_id,
        "memory_id": result.memory_id,
        "definition": result.definition,
        "definition_version": version,
        "definition_source": result.definition_source,
        "started_time": started,
        "ended_time": now_ms(),
        "status": status,
        "llm_calls": len(calls),
        "max_request_tokens": max((int(c["calibrated"]) for c in calls), default=0),
        "context_window": window,
        "model": run.view.model,
        "question": run.record[0].get("content") if run.record else None,
        "error": error,
        "response": result.response if failure is None else None,
        "calls": calls,
        "hooks": [{**h, "call": h["iteration"]} for h in run.trace],
        "archived": archived if offload else [],
        "summary": _summary(run.view.messages),
        "thresholds": _thresholds(run.definition, window),
        "cache": {k: v for k, v in result.cache.items() if k != "calls"},
        **({"estimated_cost": result.cache["estimated_cost"]} if "estimated_cost" in result.cache else {}),
    }


_USAGE_KEYS = ("iteration", *USAGE_FIELDS)


def call_entry(
    call: int,
    tokens_before: int,
    ratio: float,
    sent: Mapping[str, Any],
    usage: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One LLM call in an execution's record, as every entry point writes it (the runner, the
    proxy): the view's tokens before the managers and the request's after (``sent``, the
    call's :func:`~ctxmgmt.agents.conversation.usage_record`), both calibrated at ``ratio``
    as sent, and the provider's own usage figures (``usage``) beside them."""
    entry = {
        "call": call,
        "tokens_before": tokens_before,
        "tokens_after": sent["counted"],
        "calibrated_before": round(tokens_before * ratio),
        "calibrated": sent["calibrated"],
        "reported": sent["reported"],
        "reusable_prefix_tokens": sent["reusable_prefix_tokens"],
        "usage": {k: v for k, v in (usage or {}).items() if k not in _USAGE_KEYS},
    }
    for key in ("cached_tokens", "cache_write_tokens"):
        if key in sent:
            entry[key] = sent[key]
    return entry


def cache_summary(
    usage: Sequence[Mapping[str, Any]],
    trace: Sequence[Mapping[str, Any]],
    model: ModelConfig,
    models: ModelsConfig,
) -> dict[str, Any]:
    """The prompt cache over an execution's calls: input tokens (the provider's report, else
    the calibrated count), the reusable prefix in the same units (each call's prefix scaled by
    its input tokens over ctxmgmt's count) and its share, the provider's cached figures, and,
    with pricing, each call's estimated cost and the total. The summariser's model calls are
    priced as fresh input, each at its own model's prices, and listed apart."""
    out: dict[str, Any] = {}
    total_input = reusable_total = 0
    cached_total = written_total = 0
    calls: list[dict[str, Any]] = []
    cost = 0.0
    pricing = model.pricing
    for u in usage:
        reported = u.get("reported")
        tokens: int = u["calibrated"]
        # A report the calibration ignores (far from any tokenizer's count) prices nothing:
        # neither its input nor its cache figures.
        plausible = isinstance(reported, int) and MIN_RATIO <= reported / max(1, u["counted"]) <= MAX_RATIO
        if plausible and isinstance(reported, int):
            tokens = reported
        scale = tokens / u["counted"] if u["counted"] else 1.0
        reusable = min(tokens, round(u["reusable_prefix_tokens"] * scale))
        total_input += tokens
        reusable_total += reusable
        cached_total += u.get("cached_tokens", 0)
        written_total += u.get("cache_write_tokens", 0)
        if pricing is not None:
            call_cost = pricing.call(
                tokens,
                reusable,
                output_tokens(u),
                cached=u.get("cached_tokens") if plausible else None,
                written=u.get("cache_write_tokens") if plausible else None,
            )
            cost += call_cost
            calls.append({"call": u["iteration"], "estimated_cost": round(call_cost, 8)})
    out["llm_calls"] = len(usage)
    out["input_tokens"] = total_input
    out["reusable_prefix_tokens"] = reusable_total
    out["reusable_share"] = round(reusable_total / total_input, 4) if total_input else None
    if any("cached_tokens" in u for u in usage):
        out["cached_tokens"] = cached_total
    if any("cache_write_tokens" in u for u in usage):
        out["cache_write_tokens"] = written_total
    summarizer: list[dict[str, Any]] = []
    for run in trace:
        for entry in run.get("entries", ()):
            for used in entry.get("details", {}).get("model_calls", ()):
                spec = models.get(used["model_id"])
                tokens_in = reported_input_tokens(used["usage"]) or 0
                item: dict[str, Any] = {
                    "call": run.get("iteration"),
                    "type": entry["type"],
                    "model_id": used["model_id"],
                    "input_tokens": tokens_in,
                    "output_tokens": output_tokens(used["usage"]),
                }
                if spec is not None and spec.pricing is not None:
                    item["estimated_cost"] = round(spec.pricing.fresh(tokens_in, item["output_tokens"]), 8)
                    cost += item["estimated_cost"]
                summarizer.append(item)
    if summarizer:
        out["summarizer_calls"] = summarizer
    if pricing is not None:
        out["pricing"] = pricing.to_dict()
        out["estimated_cost"] = round(cost, 8)
        out["calls"] = calls
    return out


def _summary(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The summary the model saw last (found by the incremental scan of pinned messages)."""
    for i in pinned_positions(messages):
        if is_summary(messages[i]):
            return text_of(messages[i].get("content"))
    return None


def _thresholds(definition: Definition | None, window: int | None) -> list[dict[str, Any]]:
    """The token levels at which the definition's entries fire, for the timeline: each
    ``tokens_exceed`` and ``tokens_ratio_exceed`` (times the window), and the fit step's."""
    out: list[dict[str, Any]] = []
    if definition is None:
        return out
    for hook, specs in definition.hooks.items():
        for index, spec in enumerate(specs):
            pending = [spec.activation]
            while pending:  # any_of alternatives, however deep
                activation = pending.pop()
                pending.extend(activation.any_of)
                for rule, limit in activation.rules:
                    tokens = limit if rule == "tokens_exceed" else None
                    if rule == "tokens_ratio_exceed" and window:
                        tokens = round(limit * window)
                    if tokens is not None:
                        out.append(
                            {
                                "hook": hook.value,
                                "index": index,
                                "type": spec.type,
                                "rule": rule,
                                "tokens": tokens,
                            }
                        )
    if window and definition.settings.get("fit", True) is not False:
        out.append(
            {
                "hook": "pre_llm",
                "index": None,
                "type": "fit",
                "rule": "window - reserve",
                "tokens": window - reserve_tokens(window, definition.settings),
            }
        )
    return out
