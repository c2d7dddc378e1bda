"""OpenTelemetry spans and metrics of hook runs, exported through the SDK's in-memory exporter."""

import subprocess
import sys

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ctxmgmt import Context, load_definition, telemetry
from ctxmgmt.testing import make_conversation

DEFINITION = {
    "name": "otel",
    "hooks": {
        "pre_llm": [
            {"type": "SlidingWindowManager", "config": {"max_messages": 10}},
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 5},
                "activation": {"message_count_exceed": 999},
            },
        ]
    },
}


@pytest.fixture
def exported():
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    telemetry.configure(
        tracer_provider=tracer_provider, meter_provider=MeterProvider(metric_readers=[reader])
    )
    yield spans, reader
    telemetry.configure()


def test_a_span_per_hook_run_and_per_entry_with_genai_attributes(exported):
    """The hook run's span holds one span per entry; GenAI and ctxmgmt attributes say what each did."""
    spans, _ = exported
    context = Context(messages=make_conversation(60), model="gpt-4o", context_window=128_000)
    load_definition(DEFINITION).apply("pre_llm", context, session="conv-1")
    finished = {s.name: s for s in spans.get_finished_spans()}
    hook = finished["ctxmgmt.hook pre_llm"]
    assert hook.attributes["gen_ai.request.model"] == "gpt-4o"
    assert hook.attributes["gen_ai.conversation.id"] == "conv-1"
    assert hook.attributes["gen_ai.conversation.compacted"] is True
    entries = [s for s in spans.get_finished_spans() if s.name == "ctxmgmt.manager SlidingWindowManager"]
    assert [s.attributes["ctxmgmt.activated"] for s in entries] == [True, False]
    assert all(s.parent.span_id == hook.context.span_id for s in entries)
    fired = entries[0].attributes
    assert fired["ctxmgmt.messages.removed"] == fired["ctxmgmt.messages.before"] - 10 > 0
    assert fired["ctxmgmt.tokens.after"] < fired["ctxmgmt.tokens.before"]


def test_metrics_count_activations_and_tokens_freed(exported):
    """activations, tokens freed and duration are recorded per manager type and hook."""
    _, reader = exported
    context = Context(messages=make_conversation(60))
    load_definition(DEFINITION).apply("pre_llm", context)
    data = reader.get_metrics_data()
    points = {
        m.name: m.data.data_points[0]
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    assert points["ctxmgmt.manager.activations"].value == 1
    assert points["ctxmgmt.manager.activations"].attributes == {
        "ctxmgmt.manager.type": "SlidingWindowManager",
        "ctxmgmt.hook": "pre_llm",
    }
    assert points["ctxmgmt.tokens.freed"].value > 0
    assert points["ctxmgmt.manager.duration"].count == 1


def test_without_opentelemetry_installed_nothing_is_recorded():
    """With the opentelemetry packages absent, ctxmgmt imports and applies definitions as before."""
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import ctxmgmt\n"
        "from ctxmgmt import telemetry\n"
        "from ctxmgmt.testing import make_conversation\n"
        "assert not telemetry.AVAILABLE\n"
        "window = {'type': 'SlidingWindowManager', 'config': {'max_messages': 3}}\n"
        "d = ctxmgmt.load_definition({'name': 'x', 'hooks': {'pre_llm': [window]}})\n"
        "r = d.apply('pre_llm', ctxmgmt.Context(messages=make_conversation(20)))\n"
        "assert r.trace[0]['activated']\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr


def test_a_failing_entry_and_a_request_that_cannot_fit_are_errors_on_their_spans(exported):
    """An entry with on_error: fail that raises, and a fit that raises, end their spans with
    an error status, and the error is counted."""
    from ctxmgmt import ContextError, ContextManager, ManagerError, ManagerRegistry

    spans, reader = exported

    class Boom(ContextManager):
        type_name = "Boom"
        config_schema = {"type": "object"}

        def apply(self, context, runtime):
            raise RuntimeError("disk on fire")

    registry = ManagerRegistry()
    registry.register(Boom)
    failing = load_definition(
        {"name": "f", "hooks": {"pre_llm": [{"type": "Boom", "on_error": "fail"}]}}, registry=registry
    )
    with pytest.raises(ManagerError):
        failing.apply("pre_llm", Context(messages=[{"role": "user", "content": "q"}]))
    entry = next(s for s in spans.get_finished_spans() if s.name == "ctxmgmt.manager Boom")
    hook = next(s for s in spans.get_finished_spans() if s.name == "ctxmgmt.hook pre_llm")
    assert not entry.status.is_ok and not hook.status.is_ok
    assert hook.attributes["error.type"] == "ManagerError"
    spans.clear()
    tight = Context(
        system_prompt="s " * 5000, messages=[{"role": "user", "content": "q"}], context_window=1000
    )
    with pytest.raises(ContextError):
        load_definition("default").apply("pre_llm", tight)
    hook = next(s for s in spans.get_finished_spans() if s.name == "ctxmgmt.hook pre_llm")
    assert hook.attributes["error.type"] == "ContextError"
    points = [
        p
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "ctxmgmt.manager.errors"
        for p in m.data.data_points
    ]
    assert sum(p.value for p in points) >= 1
