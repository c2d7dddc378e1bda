"""Execution records, memory routes and agent replacement, through REST, the client and the CLI."""

import json
import subprocess
import sys

import pytest

from ctxmgmt import ApiError, Client
from ctxmgmt.api import create_app
from ctxmgmt.cli import trace_lines
from tests.conftest import LiveServer, tool_call

WINDOWED = {
    "hooks": {
        "post_tool": [{"type": "ToolsOutputTruncateManager", "config": {"max_output_length": 2000}}],
        "pre_llm": [
            {
                "type": "SlidingWindowManager",
                "config": {"max_messages": 6},
                "activation": {"tokens_exceed": 1500},
            }
        ],
    }
}
AGENT = {
    "name": "helper",
    "type": "conversational",
    "llm": {"model_id": "chat", "parameters": {"max_iteration": 8}},
    "tools": [{"type": "big"}],
    "context_management_name": "windowed",
}


@pytest.fixture
def client(store, agent_models, tools):
    with LiveServer(create_app(store, models=agent_models, tools=tools)) as server, Client(server.url) as c:
        c.url = server.url
        yield c


def run_agent(client, chat_server, agent_id, rounds, memory_id=None):
    for _ in range(rounds):
        chat_server.reply(tool_call(("big", {"size": 6000})))
    chat_server.reply("done")
    return client.execute(agent_id, "Read the logs.", memory_id=memory_id)


def test_every_execution_leaves_a_record_that_rest_lists_and_returns(client, chat_server):
    """An execution's id comes back with its answer; its record has the definition and version,
    per LLM call the tokens before and after the managers, per hook run where a manager fired,
    and the agent's listing shows it newest first with its largest request and window."""
    client.create("windowed", WINDOWED)
    agent_id = client.register_agent(AGENT)
    first = run_agent(client, chat_server, agent_id, 1)
    second = run_agent(client, chat_server, agent_id, 4, memory_id=first["memory_id"])
    listing = client.executions(agent_id)
    assert listing["total"] == 2
    assert [e["execution_id"] for e in listing["executions"]] == [
        second["execution_id"],
        first["execution_id"],
    ]
    record = client.execution(second["execution_id"])
    assert (record["definition"], record["definition_version"], record["definition_source"]) == (
        "windowed",
        1,
        "agent",
    )
    assert (
        record["status"] == "finished" and record["response"] == "done" and record["context_window"] == 16000
    )
    calls = record["calls"]
    assert [c["call"] for c in calls] == [1, 2, 3, 4, 5] and record["llm_calls"] == 5
    assert record["max_request_tokens"] == max(c["calibrated"] for c in calls)
    fired = [(h["call"], e["type"]) for h in record["hooks"] for e in h["entries"] if e["activated"]]
    windowed = [call for call, kind in fired if kind == "SlidingWindowManager"]
    assert windowed and all(calls[n - 1]["tokens_after"] < calls[n - 1]["tokens_before"] for n in windowed)
    assert {t["type"] for t in record["thresholds"]} == {"SlidingWindowManager", "fit"}
    assert listing["executions"][0]["max_request_tokens"] == record["max_request_tokens"]


def test_a_failed_execution_is_recorded_with_its_error(client, chat_server):
    """An execution whose model fails still leaves a record, with status error and the reason."""
    client.create("windowed", WINDOWED)
    agent_id = client.register_agent(AGENT)
    chat_server.fail(400, "bad request from the provider")
    with pytest.raises(ApiError):
        client.execute(agent_id, "q")
    (row,) = client.executions(agent_id)["executions"]
    record = client.execution(row["execution_id"])
    assert record["status"] == "error" and "bad request from the provider" in record["error"]


def test_memory_routes_return_the_view_and_the_whole_record(client, chat_server):
    """GET memory returns the managed view the model saw last; GET memory/messages the complete
    stored record, untruncated, paged, with its total."""
    client.create("windowed", WINDOWED)
    agent_id = client.register_agent(AGENT)
    answer = run_agent(client, chat_server, agent_id, 4)
    memory = client.memory(answer["memory_id"])
    assert memory["agent_id"] == agent_id and "_view" not in memory["state"]
    assert all(len(m.get("content") or "") <= 2000 for m in memory["view"])
    whole = client.memory_messages(answer["memory_id"])
    assert whole["total"] == len(whole["messages"]) == 10
    assert [len(m["content"]) for m in whole["messages"] if m["role"] == "tool"] == [6000] * 4
    page = client.memory_messages(answer["memory_id"], from_=8, size=5)
    assert page["total"] == 10 and page["messages"] == whole["messages"][8:]


def test_an_agent_is_replaced_with_the_checks_of_registration(client, chat_server):
    """PUT replaces the registration (the next execution uses it); an invalid body is a 400
    naming the field; an unknown agent is a 404."""
    client.create("windowed", WINDOWED)
    agent_id = client.register_agent(AGENT)
    with pytest.raises(ApiError) as bad:
        client.replace_agent(agent_id, {**AGENT, "context_management_name": "missing"})
    assert bad.value.status == 400 and bad.value.problems[0].pointer == "/context_management_name"
    unmanaged = {k: v for k, v in AGENT.items() if k != "context_management_name"}
    client.replace_agent(agent_id, {**unmanaged, "name": "renamed"})
    chat_server.reply("plain")
    answer = client.execute(agent_id, "q")
    assert answer["context_management"]["definition"] is None
    with pytest.raises(ApiError) as missing:
        client.replace_agent("0" * 32, AGENT)
    assert missing.value.status == 404


@pytest.mark.parametrize(
    "path",
    [
        "/_plugins/_ml/executions/nope",
        "/_plugins/_ml/executions/" + "0" * 32,
        "/_plugins/_ml/memory/" + "0" * 32,
        "/_plugins/_ml/memory/" + "0" * 32 + "/messages",
        "/_plugins/_ml/agents/" + "0" * 32 + "/executions",
    ],
)
def test_unknown_ids_are_404_in_opensearch_shape(client, path):
    """An unknown or malformed id is a 404 with OpenSearch's error body."""
    response = client._http.get(path)
    assert response.status_code == 404 and response.json()["error"]["type"] == "resource_not_found_exception"


def test_the_cli_lists_executions_and_prints_the_timeline(client, chat_server):
    """ctxmgmt executions list|get and ctxmgmt trace read the records through REST; the trace
    prints one line per LLM call with a bar against the window and what fired."""
    client.create("windowed", WINDOWED)
    agent_id = client.register_agent(AGENT)
    answer = run_agent(client, chat_server, agent_id, 4)

    def cli(*args):
        command = [sys.executable, "-m", "ctxmgmt.cli", *args, "--url", client.url]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    listed = cli("executions", "list", agent_id)
    assert listed.returncode == 0 and json.loads(listed.stdout)["total"] == 1
    assert answer["execution_id"] in listed.stderr
    got = cli("executions", "get", answer["execution_id"])
    assert json.loads(got.stdout)["execution_id"] == answer["execution_id"]
    trace = cli("trace", answer["execution_id"])
    assert trace.returncode == 0, trace.stderr
    rows = [line for line in trace.stdout.splitlines() if line[:4].strip().isdigit()]
    assert len(rows) == 5 and all(line.count("|") == 1 for line in rows)
    assert "SlidingWindowManager (pre_llm[0])" in trace.stdout
    assert "pre_llm removed [tool] row row row" in trace.stdout  # what the window took off
    assert cli("trace", "f" * 32).returncode == 2


def test_trace_lines_scale_bars_to_the_window():
    """A call at the window fills its bar; what the managers removed shows as dots."""
    record = {
        "execution_id": "e",
        "agent_id": "a",
        "memory_id": "m",
        "definition": "d",
        "definition_version": 2,
        "definition_source": "agent",
        "status": "finished",
        "context_window": 1000,
        "max_request_tokens": 1000,
        "calls": [
            {"call": 1, "tokens_before": 1000, "calibrated_before": 1000, "calibrated": 500, "reported": 510}
        ],
        "hooks": [],
    }
    (row,) = trace_lines(record, width=10)[3:]
    assert "#####.....|" in row


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("name: x\nhooks: {pre_llm: [{type: SlidingWindow}]}\n", "did you mean 'SlidingWindowManager'"),
        ("a: &a [1, 2]\nb: [*a, *a]\n", "anchors or aliases"),
        ("name: x\x82\n", "unacceptable character"),
        ("name: [unclosed\n", "YAML syntax error"),
    ],
)
def test_validate_checks_an_editors_text_with_lines(client, text, says):
    """_validate answers every problem of a YAML text (line and pointer), or a 400 for a text
    it will not parse (aliases); a character YAML refuses is a problem, not a 500."""
    response = client._http.post("/_plugins/_ml/context_management/_validate", json={"text": text})
    if response.status_code == 400:
        assert says in response.json()["error"]["reason"]
        return
    body = response.json()
    assert response.status_code == 200 and not body["valid"] and body["definition"] is None
    assert any(says in p["message"] for p in body["problems"]), body


def test_validate_returns_the_parsed_definition_when_valid(client):
    """A valid text comes back parsed, ready to store."""
    text = "name: ok\nhooks:\n  pre_llm:\n    - type: SlidingWindowManager\n"
    body = client._http.post("/_plugins/_ml/context_management/_validate", json={"text": text}).json()
    assert body["valid"] and body["definition"]["hooks"]["pre_llm"][0]["type"] == "SlidingWindowManager"


def test_a_replaced_inline_definition_is_the_one_that_runs(client, chat_server):
    """An agent replaced with another inline definition runs that one at once: built
    definitions are kept by their content, never by the agent's id alone."""
    first = {k: v for k, v in AGENT.items() if k != "context_management_name"}
    window = {"hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 5}}]}}
    truncate = {"hooks": {"pre_llm": [{"type": "ToolsOutputTruncateManager"}]}}
    agent_id = client.register_agent({**first, "context_management": window})
    chat_server.reply("one")
    types = {
        e["type"] for t in client.execute(agent_id, "q")["context_management"]["trace"] for e in t["entries"]
    }
    assert "SlidingWindowManager" in types
    client.replace_agent(agent_id, {**first, "context_management": truncate})
    chat_server.reply("two")
    types = {
        e["type"] for t in client.execute(agent_id, "q")["context_management"]["trace"] for e in t["entries"]
    }
    assert "ToolsOutputTruncateManager" in types and "SlidingWindowManager" not in types


@pytest.mark.parametrize(
    "context",
    [
        {
            "format": "anthropic",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "tool_use_id": "a", "content": [{"type": []}]}],
                }
            ],
        },
        {"messages": [{"type": "message", "role": {}, "content": "x"}]},
        {"messages": [{"role": "user", "content": [{"type": []}]}], "format": "openai_responses"},
        {
            "messages": [
                {"role": "user", "content": "q"},
                {"type": "computer_call", "call_id": "c", "action": {}},
                {"type": "computer_call_output", "call_id": "c", "output": [None]},
            ]
        },
        {
            "messages": [
                {"role": "user", "content": [{"type": "input_image", "image_url": "u", "detail": []}]}
            ]
        },
        {
            "messages": [
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u", "detail": {}}}]}
            ]
        },
    ],
)
def test_wrong_types_in_any_format_are_400_not_500(client, context):
    """Wrong types inside parts and items, in every format, are a 400 naming the place (or
    counted as they are), never a 500."""
    body = {
        "definition": {
            "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "config": {"max_messages": 2}}]}
        },
        "context": context,
    }
    response = client._http.post("/_plugins/_ml/context_management/_simulate", json=body)
    assert response.status_code in (200, 400), response.text


def test_the_page_serves_its_files_only(client):
    """/ui serves the page and its two files with a strict CSP; any other path is a 404."""
    page = client._http.get("/ui")
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    assert client._http.get("/ui/app.js").headers["content-type"].startswith("text/javascript")
    for path in ("/ui/../app.py", "/ui/index.html", "/ui/%2e%2e%2fpage.py", "/ui/app.js/x"):
        assert client._http.get(path).status_code == 404, path


def test_a_call_that_fails_is_in_the_record(client, chat_server):
    """The LLM call that failed keeps its entry (the tokens it would have sent, failed: true),
    so what fired before it shows on the timeline."""
    client.create("windowed", WINDOWED)
    agent_id = client.register_agent(AGENT)
    chat_server.reply(tool_call(("big", {"size": 6000})))
    chat_server.fail(400, "context too long for this provider")
    with pytest.raises(ApiError):
        client.execute(agent_id, "q")
    record = client.execution(client.executions(agent_id)["executions"][0]["execution_id"])
    assert [c["call"] for c in record["calls"]] == [1, 2]
    assert record["calls"][1]["failed"] and record["calls"][1]["reported"] is None
    assert record["calls"][1]["tokens_after"] > record["calls"][0]["tokens_after"]


def test_simulate_gives_a_compaction_a_throwaway_store(client):
    """A manager that always archives first simulates without touching the server's stores."""
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "a", "content": "row " * 3000},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "next"},
    ]
    definition = {"hooks": {"pre_llm": [{"type": "ToolResultCompactionManager", "config": {"recent_n": 0}}]}}
    body = {"definition": definition, "context": {"messages": messages}}
    result = client._http.post("/_plugins/_ml/context_management/_simulate", json=body).json()
    assert not [e["error"] for e in result["trace"] if e["error"]]


def test_validate_takes_indented_json_and_refuses_deep_nesting(client):
    """Indentation counts by level, not by spaces: a JSON text indented by 4 is taken; a text
    nesting past 32 levels is a 400 before any parsing."""
    nested: dict = {"tokens_exceed": 5}
    for _ in range(7):
        nested = {"any_of": [nested]}
    doc = {"name": "deep", "hooks": {"pre_llm": [{"type": "SlidingWindowManager", "activation": nested}]}}
    ok = client._http.post(
        "/_plugins/_ml/context_management/_validate", json={"text": json.dumps(doc, indent=4)}
    )
    assert ok.status_code == 200 and ok.json()["valid"], ok.text
    deep = client._http.post(
        "/_plugins/_ml/context_management/_validate", json={"text": "a: " + "[" * 40 + "]" * 40}
    )
    assert deep.status_code == 400 and "nests 40 deep" in deep.json()["error"]["reason"]


def test_the_prompt_cache_figures_come_out_of_rest_in_the_answer_and_the_record(
    store, agent_models, tools, chat_server
):
    """With pricing configured, an execution through REST answers with each call's reusable
    prefix, the provider's cached tokens and the estimated cost (in context_management.cache),
    and its record carries the same figures per call and in total; the CLI's trace prints them."""
    from ctxmgmt import ModelConfig, ModelsConfig
    from ctxmgmt.cache import Pricing

    chat = agent_models["chat"]
    priced = ModelsConfig(
        {
            "chat": ModelConfig(
                id="chat",
                base_url=chat.base_url,
                model=chat.model,
                context_window=chat.context_window,
                timeout=2.0,
                max_retries=1,
                pricing=Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
            )
        }
    )
    with LiveServer(create_app(store, models=priced, tools=tools)) as server, Client(server.url) as c:
        c.create("windowed", WINDOWED)
        agent_id = c.register_agent(AGENT)

        def usage(request):  # a provider's own count, near ctxmgmt's, and half of it cached
            prompt = len(json.dumps(request["messages"])) // 4 + 40
            return {
                "prompt_tokens": prompt,
                "completion_tokens": 10,
                "prompt_tokens_details": {"cached_tokens": prompt // 2},
            }

        chat_server.respond(lambda _: tool_call(("big", {"size": 1000})), usage=usage)
        chat_server.respond(lambda _: tool_call(("big", {"size": 1000})), usage=usage)
        chat_server.respond(lambda _: "done", usage=usage)
        answer = c.execute(agent_id, "Read the logs.")
        calls = answer["usage"]
        assert calls[0]["reusable_prefix_tokens"] == 0
        assert 0 < calls[1]["reusable_prefix_tokens"] < calls[1]["counted"]
        assert calls[2]["reusable_prefix_tokens"] > calls[1]["reusable_prefix_tokens"]
        assert all(u["cached_tokens"] == u["reported"] // 2 for u in calls)
        cache = answer["context_management"]["cache"]
        per_call = [
            ((u["reported"] - u["cached_tokens"]) * 3.0 + u["cached_tokens"] * 0.3 + 10 * 15.0) / 1e6
            for u in calls
        ]
        assert cache["estimated_cost"] == pytest.approx(sum(per_call))
        assert cache["input_tokens"] == sum(u["reported"] for u in calls)
        assert cache["cached_tokens"] == sum(u["cached_tokens"] for u in calls)
        # In the provider's units, as input_tokens: each call's prefix scaled by its report.
        scaled = sum(round(u["reusable_prefix_tokens"] * u["reported"] / u["counted"]) for u in calls)
        assert cache["reusable_prefix_tokens"] == scaled
        assert cache["reusable_share"] == round(scaled / cache["input_tokens"], 4)
        record = c.execution(answer["execution_id"])
        assert record["estimated_cost"] == pytest.approx(sum(per_call))
        assert [r["reusable_prefix_tokens"] for r in record["calls"]] == [
            u["reusable_prefix_tokens"] for u in calls
        ]
        assert [r["cached_tokens"] for r in record["calls"]] == [u["cached_tokens"] for u in calls]
        assert record["cache"]["reusable_share"] == cache["reusable_share"]
        out = subprocess.run(
            [sys.executable, "-m", "ctxmgmt.cli", "trace", answer["execution_id"], "--url", server.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "estimated cost" in out.stdout and "reusable" in out.stdout
