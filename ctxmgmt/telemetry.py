"""OpenTelemetry spans and metrics for hook runs (``pip install 'ctxmgmt[otel]'``).

A span per hook run (``ctxmgmt.hook <hook>``) and, under it, one per manager entry
(``ctxmgmt.manager <type>``), children of whatever span is current (an agent framework's
model call, a web request), so that a summariser's own model call nests under its entry.
Attributes follow the GenAI semantic conventions where they exist (``gen_ai.request.model``,
``gen_ai.conversation.id``, ``gen_ai.conversation.compacted``) and are ``ctxmgmt.*`` for the
rest. Metrics: the counters ``ctxmgmt.manager.activations``, ``ctxmgmt.manager.errors`` and
``ctxmgmt.tokens.freed``, and the histogram ``ctxmgmt.manager.duration`` (ms).

Without the ``opentelemetry-api`` package this module does nothing and costs one check per
hook run; with it but no SDK configured (the API's proxy or no-op provider), one more.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace

    AVAILABLE = True
except ImportError:  # the extra is not installed
    AVAILABLE = False

if TYPE_CHECKING:
    from .context import Context
    from .types import TraceEntry

__all__ = ["HookTelemetry", "configure", "hook_telemetry"]

_providers: dict[str, Any] = {}
_instruments: dict[str, Any] = {}


def configure(*, tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Use these providers instead of the global ones (tests, or an app with its own)."""
    _providers.clear()
    _instruments.clear()
    if tracer_provider is not None:
        _providers["tracer"] = tracer_provider
    if meter_provider is not None:
        _providers["meter"] = meter_provider


def _global_provider() -> Any:
    """The global tracer provider, or None when none is set. The API's own getter looks the
    environment up on every call (a microsecond per hook run); its global is read first."""
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is None and not _FROM_ENVIRONMENT:
        return None
    return trace.get_tracer_provider()


_UNKNOWN = object()
_FROM_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def _tracer() -> Any:
    provider = _providers.get("tracer") or trace.get_tracer_provider()
    return provider.get_tracer("ctxmgmt")


def _meter_instruments() -> dict[str, Any]:
    if not _instruments:
        provider = _providers.get("meter") or metrics.get_meter_provider()
        meter = provider.get_meter("ctxmgmt")
        _instruments.update(
            activations=meter.create_counter(
                "ctxmgmt.manager.activations", description="manager entries that ran"
            ),
            errors=meter.create_counter("ctxmgmt.manager.errors", description="manager entries that failed"),
            freed=meter.create_counter(
                "ctxmgmt.tokens.freed", unit="{token}", description="tokens a manager removed"
            ),
            duration=meter.create_histogram(
                "ctxmgmt.manager.duration", unit="ms", description="a manager entry's run"
            ),
        )
    return _instruments


class HookTelemetry:
    """The spans and metrics of one hook run."""

    __slots__ = ("_entry", "_hook", "_span", "_token", "_type")

    def __init__(self, span: Any, hook: str) -> None:
        self._span = span
        self._hook = hook
        self._entry: Any = None
        self._token: Any = None
        self._type = ""

    def entry_started(self, type_name: str, index: int) -> None:
        """A manager entry runs: its span becomes the current one while it does."""
        parent = trace.set_span_in_context(self._span)
        self._type = type_name
        self._entry = _tracer().start_span(f"ctxmgmt.manager {type_name}", context=parent)
        self._token = otel_context.attach(trace.set_span_in_context(self._entry))

    def entry_done(self, entry: TraceEntry) -> None:
        """Record a trace entry: on the span of the entry that ran, or on a span of its own."""
        span = self._entry
        if span is None:
            parent = trace.set_span_in_context(self._span)
            span = _tracer().start_span(f"ctxmgmt.manager {entry['type']}", context=parent)
        else:
            otel_context.detach(self._token)
            self._entry = self._token = None
        span.set_attributes(_entry_attributes(entry))
        if entry["error"]:
            span.set_status(trace.Status(trace.StatusCode.ERROR, entry["error"][:200]))
        span.end()
        if entry["activated"]:
            labels = {"ctxmgmt.manager.type": entry["type"], "ctxmgmt.hook": entry["hook"]}
            instruments = _meter_instruments()
            instruments["activations"].add(1, labels)
            instruments["duration"].record(entry["duration_ms"], labels)
            freed = entry["tokens_before"] - entry["tokens_after"]
            if freed > 0:
                instruments["freed"].add(freed, labels)
            if entry["error"]:
                instruments["errors"].add(1, labels)

    def done(
        self, trace_entries: tuple[TraceEntry, ...], after: Context, error: BaseException | None = None
    ) -> None:
        """End the hook run's span with what it did, and how it failed when it raised (an
        entry with ``on_error: fail``, a context that cannot fit)."""
        if error is not None:
            status = trace.Status(trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"[:200])
            self._span.set_status(status)
            self._span.set_attribute("error.type", type(error).__name__)
        if self._entry is not None:  # the entry that raised out of the run
            otel_context.detach(self._token)
            if error is not None:
                self._entry.set_status(status)
                self._entry.set_attribute("error.type", type(error).__name__)
                labels = {"ctxmgmt.manager.type": self._type, "ctxmgmt.hook": self._hook}
                _meter_instruments()["errors"].add(1, labels)
            self._entry.end()
            self._entry = None
        fired = [e for e in trace_entries if e["activated"] and not e["error"]]
        compacted = any(
            e["messages_after"] != e["messages_before"] or e["tokens_after"] < e["tokens_before"]
            for e in fired
        )
        self._span.set_attributes(
            {
                "gen_ai.conversation.compacted": compacted,
                "ctxmgmt.entries.activated": len(fired),
                "ctxmgmt.tokens.after": trace_entries[-1]["tokens_after"] if trace_entries else 0,
                "ctxmgmt.messages.after": len(after.messages),
            }
        )
        self._span.end()


def hook_telemetry(
    definition: str, hook: str, context: Context, session: str, tokens: int | None = None
) -> HookTelemetry | None:
    """The telemetry of a hook run starting now, or None when nothing records it."""
    if not AVAILABLE:
        return None
    provider = _providers.get("tracer") or _global_provider()
    if provider is None or isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None  # no SDK set up (yet): its spans would record nothing
    attributes = {
        "ctxmgmt.definition": definition,
        "ctxmgmt.hook": hook,
        "gen_ai.conversation.id": session,
        "ctxmgmt.messages.before": len(context.messages),
    }
    if context.model:
        attributes["gen_ai.request.model"] = context.model
    if context.context_window:
        attributes["ctxmgmt.context_window"] = context.context_window
    span = provider.get_tracer("ctxmgmt").start_span(f"ctxmgmt.hook {hook}", attributes=attributes)
    if not span.is_recording():
        span.end()
        return None
    return HookTelemetry(span, hook)


def _entry_attributes(entry: TraceEntry) -> dict[str, Any]:
    details: Mapping[str, Any] = entry["details"]
    offloaded = details.get("offloaded")
    archived = len(offloaded) if isinstance(offloaded, list) else int(bool(offloaded))
    out: dict[str, Any] = {
        "ctxmgmt.manager.type": entry["type"],
        "ctxmgmt.manager.index": entry["index"],
        "ctxmgmt.hook": entry["hook"],
        "ctxmgmt.activated": entry["activated"],
        "ctxmgmt.tokens.before": entry["tokens_before"],
        "ctxmgmt.tokens.after": entry["tokens_after"],
        "ctxmgmt.messages.before": entry["messages_before"],
        "ctxmgmt.messages.after": entry["messages_after"],
        "ctxmgmt.messages.removed": max(0, entry["messages_before"] - entry["messages_after"]),
        "ctxmgmt.references.archived": archived,
        "ctxmgmt.tokenizer": entry["tokenizer"],
    }
    if entry["error"]:
        out["error.type"] = entry["error"].split(":", 1)[0][:100]
    calibration = entry.get("calibration")
    if calibration:
        out["ctxmgmt.calibration.ratio"] = calibration["ratio"]
    return out
